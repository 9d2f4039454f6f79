"""Vendor performance guides: every csv-table read cell by cell (`guide`, `cells`) and what a
campaign that publishes one needs next (`campaign`). Pure.
"""

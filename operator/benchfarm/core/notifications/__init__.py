"""Notifications, decided: who is told of what, what they receive, when a failed delivery is tried
again (`rules`). Pure.
"""

"""Boards through labgrid: coordinator client, boot strategy and timing, board sessions."""

"""Notifications: what the operator hands the notifier (`inbox`), the notifier and its threads
(`notifier`), the durable outbox's work (`dispatch`), one attempt at one delivery (`deliveries`),
and a Notification's status written back (`status`).
"""

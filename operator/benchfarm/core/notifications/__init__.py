"""Notifications, decided: who is told of what (`rules`), the events themselves (`events`), what
a receiver gets (`bodies`), when a failed delivery is tried again (`retry`), where a webhook may
point (`webhooks`), and what a Notification's status shows of its deliveries (`delivered`). Pure.
"""

"""An e-mail through the lab's SMTP server, always over STARTTLS (the server's certificate is
verified: against BENCHFARM_SMTP_CA_FILE where the lab's relay has a certificate of its own CA,
else the system's), with a login where the lab gives one. The server is the lab's, from the
operator's settings (the chart's `notifications.smtp` values), never a tenant's: a Notification
names only recipients (on its namespace's LabPolicy emailDomains, `core.notifications.rules`). The attempt has
one deadline (`notify.deadline`), the connection, STARTTLS, the login and the mail together.
"""

from __future__ import annotations

import smtplib
import socket
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate

from benchfarm.api.notifications import DELIVERY_HEADER
from benchfarm.notify import DeliveryFailed
from benchfarm.notify.deadline import Deadline
from benchfarm.settings import Settings

DEADLINE = 20.0         # seconds for the attempt, from connecting to the server's last answer


@dataclass(frozen=True)
class SmtpSettings:
    host: str
    port: int = 587
    sender: str = "benchfarm@localhost"
    username: str = ""
    password: str = ""
    ca_file: str = ""

    @classmethod
    def from_settings(cls, s: Settings) -> SmtpSettings | None:
        """None where the lab has no SMTP server (BENCHFARM_SMTP_HOST unset)."""
        if not s.smtp_host:
            return None
        return cls(host=s.smtp_host, port=s.smtp_port, sender=s.smtp_from,
                   username=s.smtp_username, password=s.smtp_password, ca_file=s.smtp_ca_file)


class _BoundedSMTP(smtplib.SMTP):
    """smtplib's client on a socket of the attempt's deadline (`Deadline.socket`)."""

    def __init__(self, deadline: Deadline, host: str, port: int) -> None:
        self.deadline = deadline
        super().__init__(host, port)          # connects (`_get_socket`)

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        addresses = [(family, kind, proto, address) for family, kind, proto, _, address
                     in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
        if not addresses:
            raise OSError(f"{host} resolves to no address")
        return self.deadline.connect(addresses)


def send(settings: SmtpSettings, to: list[str], subject: str, text: str, delivery: str,
         seconds: float = DEADLINE) -> None:
    """One attempt, within `seconds` in all; DeliveryFailed says why it did not go. The
    Message-ID is the delivery's id, so a mail sent again after a lost answer is the same
    message to the recipient's mail system."""
    msg = EmailMessage()
    msg["From"] = settings.sender
    msg["To"] = ", ".join(to)
    msg["Subject"] = subject
    msg["Date"] = formatdate(usegmt=True)
    msg["Message-ID"] = f"<{delivery}@benchfarm>"
    msg[DELIVERY_HEADER] = delivery
    msg.set_content(text)
    deadline = Deadline(seconds)
    smtp: _BoundedSMTP | None = None
    try:
        context = deadline.tls(ssl.create_default_context(cafile=settings.ca_file or None))
        smtp = _BoundedSMTP(deadline, settings.host, settings.port)
        smtp.ehlo()
        if not smtp.has_extn("starttls"):
            raise DeliveryFailed("the lab's SMTP server does not offer STARTTLS; no mail is "
                                 "sent in the clear")
        smtp.starttls(context=context)
        smtp.ehlo()
        if settings.username:
            smtp.login(settings.username, settings.password)
        smtp.send_message(msg)
    except DeliveryFailed:
        raise
    except (OSError, smtplib.SMTPException, ssl.SSLError) as exc:
        if deadline.passed:
            raise DeliveryFailed(f"the lab's SMTP server took longer than the attempt's "
                                 f"deadline of {seconds:g} s") from exc
        raise DeliveryFailed(f"the lab's SMTP server: {exc}") from exc
    else:
        try:                   # the mail went: a QUIT left unanswered does not undo that
            smtp.quit()
        except (OSError, smtplib.SMTPException):
            pass
    finally:
        if smtp is not None:
            smtp.close()

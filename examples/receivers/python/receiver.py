#!/usr/bin/env python3
"""A minimal hookline subscriber: verifies each delivery's Standard Webhooks signature with the
`standardwebhooks` package and applies it once, however often it arrives.

hookline delivers at least once: a retry after a lost answer, a dead letter replayed, a resend
after a crash all carry the `webhook-id` this receiver saw before. The id is recorded in a
SQLite table (`webhooks_seen`) in the same transaction as the side effect (a row in
`events_applied`), with the answer given; a duplicate gets that answer again and changes
nothing. A failure rolls both back, so the retry runs again.

Settings (environment):
  WEBHOOK_SECRET  the subscriber's secret, whsec_... (two, space-separated, while rotating)
  PORT            where to listen on 127.0.0.1 (9000)
  RECEIVER_DB     the SQLite file (receiver.db)
"""

import json
import os
import sqlite3
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

SECRETS = os.environ.get("WEBHOOK_SECRET", "").split()
if not SECRETS or not all(secret.startswith("whsec_") for secret in SECRETS):
    sys.exit("WEBHOOK_SECRET must hold the subscriber's secret, whsec_... (two while rotating)")
VERIFIERS = [Webhook(secret) for secret in SECRETS]
DB = os.environ.get("RECEIVER_DB", "receiver.db")
PORT = int(os.environ.get("PORT", "9000"))


def connect():
    # isolation_level=None: transactions are begun and ended here, explicitly. A duplicate
    # arriving while the first is being applied waits (up to 30 s) for its write lock.
    db = sqlite3.connect(DB, timeout=30, isolation_level=None)
    db.execute("PRAGMA synchronous = FULL")  # committed means on disk
    return db


def create_tables():
    db = connect()
    db.execute("PRAGMA journal_mode = WAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS webhooks_seen ("
        " webhook_id TEXT PRIMARY KEY, status INTEGER NOT NULL, body TEXT NOT NULL)"
    )
    db.execute(
        "CREATE TABLE IF NOT EXISTS events_applied ("
        " webhook_id TEXT NOT NULL, type TEXT NOT NULL, data TEXT NOT NULL)"
    )
    db.close()


def apply(db, webhook_id, event):
    """The receiver's own side effect, written through `db` inside the delivery's transaction."""
    db.execute(
        "INSERT INTO events_applied (webhook_id, type, data) VALUES (?, ?, ?)",
        (webhook_id, event["type"], json.dumps(event["data"])),
    )


def verified(body, headers):
    """True when any `v1,` signature matches under any secret (both during a rotation)."""
    for verifier in VERIFIERS:
        try:
            verifier.verify(body, headers, json_parse=False)
            return True
        except WebhookVerificationError:
            pass
    return False


# Larger bodies are refused unread (hookline's default payload limit is 256 KiB).
MAX_BODY_BYTES = 1024 * 1024


class Handler(BaseHTTPRequestHandler):
    timeout = 30  # a client that stops sending is dropped

    def do_POST(self):
        try:
            length = int(self.headers.get("content-length", ""))
        except ValueError:
            return self.answer(411, "a content-length is required")
        if not 0 <= length <= MAX_BODY_BYTES:
            return self.answer(413, "body too large")
        body = self.rfile.read(length)
        headers = {name.lower(): value for name, value in self.headers.items()}
        if not verified(body, headers):
            return self.answer(401, "signature not verified")
        try:
            event = json.loads(body)
            event["type"], event["data"]
        except (ValueError, KeyError, TypeError):
            return self.answer(400, "not an event")
        webhook_id = headers["webhook-id"]
        db = connect()
        try:
            db.execute("BEGIN IMMEDIATE")  # the write lock first: one copy of an id at a time
            seen = db.execute(
                "SELECT status, body FROM webhooks_seen WHERE webhook_id = ?", (webhook_id,)
            ).fetchone()
            if seen:
                db.execute("ROLLBACK")
                print("duplicate", webhook_id, headers.get("webhook-attempt"), flush=True)
                return self.answer(*seen)
            apply(db, webhook_id, event)
            db.execute(
                "INSERT INTO webhooks_seen (webhook_id, status, body) VALUES (?, ?, ?)",
                (webhook_id, 200, "applied"),
            )
            db.execute("COMMIT")  # the side effect and the seen row, together
        except Exception as error:  # the side effect failed: nothing of it is kept
            if db.in_transaction:
                db.execute("ROLLBACK")
            return self.answer(503, f"not applied: {error}")  # hookline retries
        finally:
            db.close()
        print("applied", webhook_id, headers.get("webhook-attempt"), body.decode(), flush=True)
        self.answer(200, "applied")

    def answer(self, status, text):
        body = text.encode()
        self.send_response(status)
        self.send_header("content-type", "text/plain; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass  # one line per delivery, printed above


if __name__ == "__main__":
    create_tables()
    print(f"listening on 127.0.0.1:{PORT}, deduplicating in {DB}", flush=True)
    ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()

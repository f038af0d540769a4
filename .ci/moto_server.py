"""Serve moto (the AWS emulator) on 127.0.0.1 for tilegate's tests.

Two servers, because moto's threaded server is not atomic under concurrent conditional writes
(concurrent If-None-Match completes produced several winners), while a single-threaded server
blocks every request behind an SQS long poll:

  * S3 and DynamoDB on a single-threaded server: conditional writes are evaluated one request
    at a time, as the real services guarantee.
  * SQS on a threaded server, reached through AWS_ENDPOINT_URL_SQS. moto's DeleteMessage
    rebuilds the queue's message list without the queue's lock, so two concurrent deletes (or a
    delete and a send) could each write back a list that still held the other's message: a
    deleted message came back from the dead 120 s later. The delete is made to hold the lock
    that sends already take, as one SQS queue would.

moto's ReceiveMessage checks each message's retention by computing every attribute of its
queue, counting all its messages: a receive from a queue of n messages costs n^2, and reading a
dead-letter queue of 1,000 letters took minutes. The retention check reads the one attribute.

Usage: moto_server.py PORT (threaded|single)
"""

import sys

from moto.server import DomainDispatcherApplication, create_backend_app
from moto.core.utils import unix_time
from moto.sqs.models import Queue, SQSBackend
from werkzeug.serving import run_simple

_unlocked_delete = Queue.delete_message


def _locked_delete(self, receipt_handle):
    with self._messages_lock:
        _unlocked_delete(self, receipt_handle)


Queue.delete_message = _locked_delete


def _within_retention(self, queue_name, message):
    retention = int(self.get_queue(queue_name).message_retention_period)
    return retention + message.sent_timestamp / 1000 > unix_time()


SQSBackend.is_message_valid_based_on_retention_period = _within_retention

port = int(sys.argv[1])
threaded = sys.argv[2] == "threaded"
run_simple(
    "127.0.0.1",
    port,
    DomainDispatcherApplication(create_backend_app),
    threaded=threaded,
    use_reloader=False,
    use_debugger=False,
)

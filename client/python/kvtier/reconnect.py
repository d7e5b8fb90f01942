# SPDX-License-Identifier: Apache-2.0
"""A namespace that every engine adapter opens the same way: on first use,
and again after kvtierd was away.  While it cannot be reached the adapter
serves without kvtier (misses, no stores); it is tried again at most once
a second, and each outage is logged once, with its end.

    conn = Reconnecting(identity, name="sglang", log=log)
    ns = conn.namespace()        # None while kvtierd is away
"""

import logging
import time

from . import Client, Error

# Seconds between attempts to reach a kvtierd that was not there.
RETRY_S = 1.0


class Reconnecting:
    """identity: a ModelIdentity.  client: a kvtier.Client to share (never
    closed here), or None to connect to socket (or $KVTIER_SOCKET) as
    name."""

    def __init__(self, identity, *, client: Client | None = None, socket: str | None = None,
                 name: str = "kvtier", log: logging.Logger | None = None):
        self.identity = identity
        self.client = client
        self.ns = None
        self._own = client is None
        self._socket = socket
        self._name = name
        self._log = log or logging.getLogger("kvtier")
        self._next_try = 0.0
        self._away = False  # this outage is logged

    def namespace(self):
        """The namespace, connecting first if needed; None while kvtierd
        cannot be reached (tried again after RETRY_S)."""
        if self.ns is not None:
            return self.ns
        now = time.monotonic()
        if now < self._next_try:
            return None
        try:
            if self.client is None:
                self.client = Client(socket=self._socket, name=self._name)
            self.ns = self.identity.open(self.client)
        except Error as e:
            self._next_try = now + RETRY_S
            if not self._away:
                self._log.warning("kvtier: kvtierd unavailable (%s); serving without it, "
                                  "trying again every %.0f s", e, RETRY_S)
            self._away = True
            if self._own and self.client is not None and not self.client.connected:
                self.client.close()
                self.client = None
            return None
        self._log.info("kvtier: connected, namespace %d", self.ns.info["ns_id"])
        self._away = False
        return self.ns

    def close(self):
        if self.ns is not None:
            self.ns.close()
            self.ns = None
        if self._own and self.client is not None:
            self.client.close()
            self.client = None

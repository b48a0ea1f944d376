"""Datagram security: sealing with unique nonces, replay protection, encryption.

Theory of operation
-------------------
Every datagram carries its sender's id, *boot* and *counter* in the
authenticated header (``sgcs.wire``). A node's ``Sealer`` increments the
counter for each datagram it seals; the boot is the node's incarnation (high
32 bits) and a salt drawn when the node starts (low 32 bits), so a process
restarted under the same id and incarnation still never reuses a nonce.

* **Authentication.** Without encryption, the tag is a truncated HMAC-SHA256
  under a key derived from the group secret; a node without the secret can
  neither forge a datagram nor alter one, so it cannot join, inject messages
  or disturb views (it is never answered: its datagrams fail the tag check and
  are dropped before their body is parsed).
* **Encryption (optional, ``Config.encrypt``).** AES-256-GCM from the
  ``cryptography`` package. Each sender has its own key, derived from the
  group secret and its id, and the 96-bit nonce is the sender's (boot,
  counter) truncated to 32 + 64 bits: unique per key, which is all GCM asks.
  The header is the associated data.
* **Replay protection.** ``ReplayWindow`` keeps, per sender, the latest boot,
  the highest counter and a bitmap of the last ``REPLAY_WINDOW`` counters (the
  IPsec anti-replay window, RFC 4303 section 3.4.3). A datagram of an earlier
  boot, below the window, or already seen is rejected. Only datagrams that
  passed the tag check reach the window, so forgeries cannot move it. A
  legitimate datagram delayed by more than ``REPLAY_WINDOW`` later datagrams
  of its sender is rejected too; the transport repairs it like a loss.

The window's per-sender state is capped (``MAX_REPLAY_SENDERS``); past the
cap the sender heard least recently is forgotten. Forgetting lets that
sender's recent datagrams be replayed once each, so the cap sits far above
any real group (only key holders create entries).
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from .errors import UsageError
from .wire import derive_key, hkdf, seal

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

REPLAY_WINDOW = 4_096
"""Counters remembered behind a sender's highest one."""
MAX_REPLAY_SENDERS = 65_536
"""Senders whose replay state is kept; the least recently heard is forgotten past it."""
MAX_CIPHER_KEYS = 4_096
"""Per-sender AES keys kept ready; the oldest is dropped (and derived again when needed)."""


class Cipher:
    """AES-256-GCM with one key per sender, derived from the group secret."""

    def __init__(self, secret: bytes, scheme: str = "hkdf") -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:  # pragma: no cover - a dependency of sgcs
            raise UsageError("encryption needs the 'cryptography' package: pip install cryptography") from None
        self._aesgcm = AESGCM
        # its own label: independent of the authentication key (``wire.derive_key``)
        self._master = hmac.digest(secret, b"sgcs/v1/datagram-encrypt", "sha256") if scheme == "hmac-v1" \
            else hkdf(secret, b"sgcs datagram encryption")
        self._keys: dict[int, AESGCM] = {}

    def _for(self, sender: int) -> "AESGCM":
        key = self._keys.get(sender)
        if key is None:
            if len(self._keys) >= MAX_CIPHER_KEYS:
                self._keys.pop(next(iter(self._keys)))
            derived = hmac.digest(self._master, sender.to_bytes(8, "big"), "sha256")
            key = self._keys[sender] = self._aesgcm(derived)
        return key

    @staticmethod
    def _nonce(boot: int, counter: int) -> bytes:
        return (boot & 0xFFFFFFFF).to_bytes(4, "big") + counter.to_bytes(8, "big")

    def encrypt(self, sender: int, boot: int, counter: int, body: bytes, header: bytes) -> bytes:
        return self._for(sender).encrypt(self._nonce(boot, counter), body, header)

    def decrypt(self, sender: int, boot: int, counter: int, sealed: bytes, header: bytes) -> bytes | None:
        from cryptography.exceptions import InvalidTag

        try:
            return self._for(sender).decrypt(self._nonce(boot, counter), sealed, header)
        except InvalidTag:
            return None


class Sealer:
    """Seals one node's datagrams, each under a fresh (boot, counter)."""

    def __init__(self, secret: bytes, sender: int, boot: int, encrypt: bool = False, scheme: str = "hkdf") -> None:
        self.key = derive_key(secret, scheme)
        self.cipher = Cipher(secret, scheme) if encrypt else None
        self.sender = sender
        self.boot = boot
        self.counter = 0

    def seal(self, msg_type: int, flags: int, body: bytes) -> bytes:
        """``msg_type`` a ``MsgType``, ``flags`` ``Flag`` bits (plain ints accepted: compiled, the
        annotation is checked at run time)."""
        self.counter += 1
        return seal(self.key, msg_type, flags, self.sender, body, self.boot, self.counter, self.cipher)


class ReplayWindow:
    """Which (sender, boot, counter) were accepted lately (RFC 4303's window)."""

    def __init__(self, size: int = REPLAY_WINDOW, max_senders: int = MAX_REPLAY_SENDERS) -> None:
        self.size = size
        self.max_senders = max_senders
        self._state: dict[int, tuple[int, int, int]] = {}
        """sender -> (boot, highest counter, bitmap: bit i set = highest - i seen)."""
        self.restarted = False
        """The last datagram accepted came from a new boot of a sender we knew."""

    def __len__(self) -> int:
        return len(self._state)

    def accept(self, sender: int, boot: int, counter: int) -> bool:
        """Record the datagram and say whether it is new."""
        state = self._state.pop(sender, None)  # re-inserted below: dict order is recency
        self.restarted = False
        if state is not None and boot == state[0]:
            state, accepted = self._slide(state, counter)
        elif state is None or boot >> 32 >= state[0] >> 32:
            # its first datagram, or a restart: a later incarnation, or a new
            # salt within one incarnation tick
            self.restarted = state is not None
            state, accepted = (boot, counter, 1), True
        else:
            accepted = False  # an earlier incarnation's datagram
        self._state[sender] = state
        if len(self._state) > self.max_senders:
            self._state.pop(next(iter(self._state)))
        return accepted

    def _slide(self, state: tuple[int, int, int], counter: int) -> tuple[tuple[int, int, int], bool]:
        boot, highest, bitmap = state
        if counter > highest:
            bitmap = ((bitmap << (counter - highest)) | 1) & ((1 << self.size) - 1)
            return (boot, counter, bitmap), True
        behind = highest - counter
        if behind >= self.size or bitmap >> behind & 1:
            return state, False
        return (boot, highest, bitmap | 1 << behind), True

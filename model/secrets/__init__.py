"""Secrets by handle, sealed record fields, and keys that rotate.

- ``refs``: a payload names a secret ``{"$secret": handle}``; values exist
  only at the effect boundary (``resolve_refs``).
- ``store``: the secret store port (handles, versions).
- ``keys``: the key service port (key-encryption keys, rotation, retirement).
- ``cipher``: the simulated cipher (not a real one).
- ``envelope``: which fields are sensitive, the ``Sealer``, ``keyed_digest``.
- ``keyring``: the durable store of wrapped data keys and rotation progress.
- ``rotation``: the resumable re-wrap pass.

``AgentSecrets`` is what an ``AgentWorker`` is given to use them.
"""
from __future__ import annotations

import attrs

from model.secrets.envelope import Sealer


@attrs.define
class AgentSecrets:
    """An agent's secrets: its sealer, its binding of the secret store port,
    the key of its keyed digests, the credential handle of each tool and of
    the model."""

    sealer: Sealer
    secret_store: object
    digest_key: bytes
    tool_credentials: dict = attrs.field(factory=dict)
    model_credential: str | None = None

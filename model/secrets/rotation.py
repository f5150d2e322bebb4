"""Key rotation: a resumable, idempotent pass that re-wraps every data key.

``rotate_keys`` reads (or creates) the rotation's progress record in the
keyring, makes the new key-encryption key current (new data keys use it from
then on), then pages through the keyring from the saved cursor: each row
still under the old key is unwrapped with it and wrapped under the new one
(a compare-and-set ``rewrap``). The cursor is saved after its page is
re-wrapped, never before, so a pass killed anywhere and called again with
the same rotation id leaves no row behind. A short page ends the pass: it is
marked done, then the old key is retired.
"""
from __future__ import annotations

from typing import Any

from model.failpoints import (NO_FAILPOINTS, ROTATION_AFTER_PAGE, ROTATION_AFTER_ROTATE,  # noqa: F401
                              ROTATION_BEFORE_RETIRE, ROTATION_CRASH_POINTS)


async def rotate_keys(keys: Any, keyring: Any, rotation_id: str, to_key_id: str, *, page: int = 32,
                      failpoints: Any = None) -> dict:
    """Run (or resume) the rotation ``rotation_id`` to ``to_key_id``; returns its final record."""
    assert page >= 1
    points = failpoints if failpoints is not None else NO_FAILPOINTS
    rotation = await keyring.get_rotation(rotation_id)
    if rotation is None:
        rotation = {"rotationId": rotation_id, "fromKeyId": await keys.current(), "toKeyId": to_key_id,
                    "cursor": "", "done": False}
        await keyring.save_rotation(rotation)
    from_key_id, to_key_id = rotation["fromKeyId"], rotation["toKeyId"]
    if from_key_id == to_key_id:
        return rotation
    if not rotation["done"]:
        await keys.rotate(to_key_id)
        points.hit(ROTATION_AFTER_ROTATE)
        while True:
            rows = await keyring.scan(rotation["cursor"], page)
            for row in rows:
                if row.key_id == from_key_id:
                    data_key = await keys.unwrap(from_key_id, row.wrapped)
                    await keyring.rewrap(row.dek_id, from_key_id, to_key_id, await keys.wrap(to_key_id, data_key))
            done = len(rows) < page
            rotation = {**rotation, "cursor": rows[-1].dek_id if rows else rotation["cursor"], "done": done}
            await keyring.save_rotation(rotation)
            if done:
                break
            points.hit(ROTATION_AFTER_PAGE)
    points.hit(ROTATION_BEFORE_RETIRE)
    await keys.retire(from_key_id)
    return rotation

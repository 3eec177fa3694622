"""A service-mode turn's capability lasts the turn's whole wall-time limit, wherever in a second
it is minted (the grant states whole seconds), and not a second past it."""

from __future__ import annotations

import time

import pytest

from backend.services.delivery.capabilities import CapabilityIssuer, InvalidCapability, verify
from tests.support.capabilities import CAPABILITY_KEY


@pytest.mark.parametrize("lifetime", [1, 600])
def test_a_capability_lasts_its_whole_lifetime(lifetime: int) -> None:
    key = CAPABILITY_KEY.encode()
    issuer = CapabilityIssuer(key, "http://backend", lifetime)
    for _ in range(20):  # minted at various points of a second
        issued = time.time()
        token = issuer.access(7, 8, 9).capability
        assert verify(key, token, now=issued + lifetime - 0.001).turn_id == 7
        with pytest.raises(InvalidCapability, match="expired"):
            verify(key, token, now=issued + lifetime + 1.001)
        time.sleep(0.047)

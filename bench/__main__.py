"""``python -m bench``: run the benchmark suite (see `bench.suite`); ``python -m bench soak``
runs the soak (see `bench.soak`); ``python -m bench fleet-sim --gateways N`` the fleet
simulator (see `bench.fleetsim`)."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["soak"]:
        from bench.soak.run import main as soak

        sys.exit(soak(sys.argv[2:]))
    if sys.argv[1:2] == ["fleet-sim"]:
        from bench.fleetsim.run import main as fleet_sim

        sys.exit(fleet_sim(sys.argv[2:]))
    from bench.suite import main

    sys.exit(main())

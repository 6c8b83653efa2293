"""The soak: ``python -m bench soak --minutes N`` (`bench.soak.run`).

A real daemon, mosquitto and a fake cloud (`bench.soak.rig`) under every transport's
requests at half the capacity measured first (`bench.soak.traffic`, `bench.soak.mqtt_link`),
faults on a schedule (`bench.soak.plan`), the daemon's resources sampled from /proc
(`bench.soak.probe`); what is counted and judged: `bench.soak.ledger`, `bench.soak.figures`.
"""

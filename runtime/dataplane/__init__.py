"""The one data plane between the transports (HTTP, gRPC, MQTT) and the service.

A transport decodes its request, opens a `Call` (`DataPlane.call`), lets the call check and
dispatch it, and encodes the outcome; the call owns everything in between, the same for
every transport: canary key and pinned version checks, the V2 ``timeout`` parameter merged
with the transport's own deadline, adapter-or-model dispatch (an adapter as a V2 model fans
out one run per BYTES element), Busy patience where a transport asks for it, and the
observation of the request (metrics with the transport's label, one error label table).
No transport imports another; each imports this package.
"""

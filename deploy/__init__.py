"""Building the Debian package (``deploy/build-deb``); not part of the wasmgate wheel."""

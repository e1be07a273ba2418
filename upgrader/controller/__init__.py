"""The running controller: the loop (loop.py), its wiring (runner.py), settings, metrics, the alert source.
May import: upgrader (its __version__), core, inputs, kube; never the commands or the emulator."""

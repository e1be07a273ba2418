"""The running controller: the loop (loop.py), its wiring (runner.py), settings, metrics, the alert source.
May import: upgrader.core, upgrader.kube, upgrader.inputs and itself; never the commands or the emulator."""

"""The command layer: argument parsing (cli.py), the commands, their text and table renderers, the demo.
May import: upgrader, core, inputs, kube, controller, sim, sim.apiserver, sim.controllers, sim.fleets."""

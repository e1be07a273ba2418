"""The command layer: argument parsing (cli.py), the commands, their text and table renderers, the demo.
May import: every room below it (core, inputs, kube, controller, sim); nothing in upgrader imports it."""

"""A script that lives beside the plugins but is not one: listing and checking must never run it."""
raise SystemExit("helper_script.py was run: plugin discovery must not import it")

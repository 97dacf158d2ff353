"""The compile-time device settings, kept importable here; they live in `xgraph.devices.settings`
so that the runtime reads the same settings the compile used."""
from xgraph.devices.settings import CARD_KEYS, SETTING_KEYS, apply_device_settings, parse_device_settings

__all__ = ["CARD_KEYS", "SETTING_KEYS", "apply_device_settings", "parse_device_settings"]

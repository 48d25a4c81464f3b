"""Inventory: the fleet as typed, validated `Device` records (the lowest layer)."""

from farm.inventory.device import Device
from farm.inventory.loader import Inventory, load_inventory, parse_inventory

__all__ = ["Device", "Inventory", "load_inventory", "parse_inventory"]

#!/usr/bin/env python3
"""Inventory bookkeeping: stock items, movements and a CSV report.

Example:
    def not_a_function():   # inside the module docstring
        pass
"""
import csv
import dataclasses
import functools
from datetime import date

LOW_STOCK = 5


@dataclasses.dataclass(frozen=True)
class Item:
    sku: str
    name: str
    unit_price: float

    def label(self):
        return f"{self.sku} {self.name}"


class Inventory:
    """Quantities per SKU plus a log of every movement."""

    def __init__(self):
        self.items = {}
        self.quantities = {}
        self.log = []

    # -- changes ---------------------------------------------------------
    def add_item(self, item, quantity=0):
        self.items[item.sku] = item
        self.quantities[item.sku] = quantity
        self.log.append((date.today(), item.sku, quantity))

    def move(self, sku, delta):
        if sku not in self.items:
            raise KeyError(sku)
        if self.quantities[sku] + delta < 0:
            raise ValueError(f"not enough {sku}: have {self.quantities[sku]}")
        self.quantities[sku] += delta
        self.log.append((date.today(), sku, delta))

    # -- queries ---------------------------------------------------------
    @property
    def total_value(self):
        return sum(self.items[s].unit_price * q for s, q in self.quantities.items())

    def low_stock(self, threshold=LOW_STOCK):
        return sorted(s for s, q in self.quantities.items() if q < threshold)


@functools.lru_cache(maxsize=None)
def parse_price(text):
    """Parse '12.50' or '12,50' into a float."""
    return float(text.replace(",", "."))


def load_csv(path):
    inventory = Inventory()
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            item = Item(row["sku"], row["name"], parse_price(row["price"]))
            inventory.add_item(item, int(row["quantity"]))
    return inventory


def write_report(inventory, path):
    template = '''sku,name,quantity
def looks_like_code(): but is a string
'''
    with open(path, "w", newline="", encoding="utf-8") as handle:
        handle.write(template.splitlines()[0] + "\n")
        writer = csv.writer(handle)
        for sku, quantity in sorted(inventory.quantities.items()):
            writer.writerow([sku, inventory.items[sku].name, quantity])


if __name__ == "__main__":
    import sys
    write_report(load_csv(sys.argv[1]), sys.argv[2])

"""Reading a Prometheus scrape in tests: every sample by name and labels."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Scrape"]


class Scrape:
    """The samples of one scrape of the Prometheus text format."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value

    def value(self, name: str, **labels: str) -> float:
        """The sample ``name{labels}``; a missing one fails the test with what there is."""
        key = (name, frozenset(labels.items()))
        assert key in self.samples, f"no {name}{labels} in:\n" + "\n".join(
            f"{n}{dict(sorted(ls))}" for n, ls in self.samples if n.startswith(name)
        )
        return self.samples[key]

    def labels(self, name: str, label: str) -> set[str]:
        """Every value ``label`` takes on samples called ``name``."""
        return {dict(labels)[label] for sample, labels in self.samples if sample == name and label in dict(labels)}

"""Small statistics helpers."""


def median(values):
    """Return the median of a non-empty list of numbers."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle]

"""The tutorial's demo backend, runtime half ``runtime`` (torch-free) and AOT half ``compiler`` (imports torch)."""

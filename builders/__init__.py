"""Dataset recipes written as short step lists, and the runner behind `cascade build dataset`."""

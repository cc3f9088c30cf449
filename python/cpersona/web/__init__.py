"""The read-only web view of the memory (`cpersona web`)."""

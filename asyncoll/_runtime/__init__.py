"""The one runtime of a process: settings read once, the loop thread, embedded coordinators."""

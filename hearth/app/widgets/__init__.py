"""Small widgets the subsystems share: elided labels and combo boxes, the waiting indicator."""

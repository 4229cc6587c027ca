"""The data-set side: one network per image of a folder, in-process or on Ray."""

"""The workbench's screens: the main screen, the memory browser and the first-run screen."""

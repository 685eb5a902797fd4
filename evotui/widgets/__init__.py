"""The workbench's widgets. They show what they are given and post messages; they never touch the
session, the store or the engine."""

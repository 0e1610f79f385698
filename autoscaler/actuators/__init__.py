"""Actuators: one small interface (``base.Actuator``), one implementation per file."""

"""Transports carry channel messages between processes; the channel picks one per sender/receiver pair."""

"""Pieces shared by every nsqpy program: Go-style flags, logging, addresses."""

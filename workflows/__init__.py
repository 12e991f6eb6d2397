"""Rollback workflow definitions (Hera) and their step functions."""

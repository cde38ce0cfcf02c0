"""The dataset card templates, shipped as package data."""

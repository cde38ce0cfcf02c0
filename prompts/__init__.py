"""The prompt templates (Jinja), shipped as package data and read with importlib.resources; a regular package
so that an editable install resolves it to this one folder."""

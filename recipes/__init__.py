"""The shipped recipes (quickstart, realism, PatientAct, benchmark), shipped as package data."""

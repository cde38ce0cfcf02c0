"""MHQR judging (MindEval2 §3, Appendix A, Appendix G): score every counsellor reply of any simulator's
sessions against a clinical-issue rubric, rank counsellors, and measure the judge against clinicians.
Imports only `mindcore`, like `validation/`."""

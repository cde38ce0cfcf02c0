"""The multi-session patient simulator (MindEval2/MindSim §4.2, Appendix D; PatientAct §3.3 as a second
patient engine): schedules, scenarios, prompting, memory, agenda, the move guard, the patient engines, the
session loop and the runners that simulate a pool. The command line, job, cards, publishing and exports
that compose it with the other stages live in `mindsim_app`."""

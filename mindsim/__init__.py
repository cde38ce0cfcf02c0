"""The multi-session patient simulator (MindEval2/MindSim §4.2, Appendix D), the command line, the
end-to-end job, dataset cards, publishing and post-training exports."""

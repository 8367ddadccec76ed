"""The job loop's collaborators (launcher/job.py holds the loop itself): the notices that
make the savers save (a preemption, the save request at max_steps) and the carrying out of
the restart policies' verdicts (restarts due, workers dropped and returned)."""

"""What a run leaves on disk and reads back: its events (``events``), state.json per run
(``registry``), model_dir's lease (``lease``), what the run directory could not take
(``unwritten``), the launcher's own failure (``crash``), plan.json (``plan_file``), and
an attached run's directory as the run goes (``run_record``)."""

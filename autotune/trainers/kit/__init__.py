"""What trainer adapters share: the readers of trainer output, the trial record, metrics merging, the hook env."""

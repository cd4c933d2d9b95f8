"""`make eval`: the run's configuration, its checkpoint matrix and the stages run over it."""

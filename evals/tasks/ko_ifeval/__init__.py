"""ko_ifeval: Korean instruction following with verifiable instructions (Google IFEval's format)."""

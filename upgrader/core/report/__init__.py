"""The words and the shape of what the rollout says of itself: phases and kinds, the status document.
May import: nothing of upgrader; plain libraries only (pydantic), no clock, no I/O."""

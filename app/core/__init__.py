"""The protocol-neutral generation core: neutral requests and outputs, the engine and model
interfaces, request limits, and the one generation service every frontend calls."""

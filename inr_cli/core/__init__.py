"""The user's path: coordinates, the network, the trainer and its loop, the renderer."""

"""A second OpenEngine engine written only from upstream v1's protos, standing for an engine of
today's layout: it serves upstream's Inference and Control and none of the proposal's services.
It runs in a child process of its own (see launch.py); nothing here imports the project's
`openengine` package."""

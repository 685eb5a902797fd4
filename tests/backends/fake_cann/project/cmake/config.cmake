# stand-in for the project config

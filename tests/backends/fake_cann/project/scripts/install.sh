#!/bin/bash
# stand-in for the package install script

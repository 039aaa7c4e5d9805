"""What every part of collection stands on: settings, route files and their generation, scenario types, towns, the
frame writer, the referee, the run picture and our child processes. Imports no other collect package."""

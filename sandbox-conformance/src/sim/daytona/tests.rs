//! Tests of the Daytona simulator.

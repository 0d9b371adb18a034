"""Security for the Kafka listener: who the client is (authentication, set on
the connection before any other API is served) and what it may do (one
authorizer consulted at the top of each handler). See DESIGN "Security"."""

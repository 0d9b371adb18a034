# Security groups and the network load balancer.
#
# Clients bootstrap on <nlb>:kafka_port (any zone) or, zone-aware, on
# <az>.<nlb>:<zone port>. Every agent advertises its own zone's address (the
# NLB's zonal DNS name + that zone's listener), and cross-zone load balancing is
# off, so after Metadata a client talks to agents of one zone only: no
# cross-AZ data transfer between clients and agents.

locals {
  lb_subnets = coalesce(var.load_balancer_subnets, values(var.agent_subnets))
  # Ports the NLB reaches on the agents (traffic and /healthz checks).
  agent_ports = { kafka = var.kafka_port, admin = var.admin_port }
}

# -- security groups -------------------------------------------------------------

resource "aws_security_group" "load_balancer" {
  name_prefix = "${var.name}-nlb-"
  description = "Floe NLB: Kafka listeners for clients"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-nlb" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_security_group" "agent" {
  name_prefix = "${var.name}-agent-"
  description = "Floe agents: Kafka and admin ports from the NLB only"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-agent" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_security_group" "database" {
  name_prefix = "${var.name}-db-"
  description = "Floe metastore: PostgreSQL from the agents and the compactor only"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-db" })

  lifecycle {
    create_before_destroy = true
  }
}

# Clients -> NLB: the bootstrap listener and one listener per zone.
resource "aws_vpc_security_group_ingress_rule" "lb_kafka" {
  for_each = toset(var.client_cidr_blocks)

  security_group_id = aws_security_group.load_balancer.id
  description       = "Kafka clients: bootstrap and zone listeners"
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = var.kafka_port
  to_port           = var.kafka_port + length(local.zones)
}

# NLB -> agents: traffic and /healthz checks.
resource "aws_vpc_security_group_egress_rule" "lb_to_agent" {
  for_each = toset(["kafka", "admin"])

  security_group_id            = aws_security_group.load_balancer.id
  description                  = "To agents (${each.key})"
  referenced_security_group_id = aws_security_group.agent.id
  ip_protocol                  = "tcp"
  from_port                    = local.agent_ports[each.key]
  to_port                      = local.agent_ports[each.key]
}

resource "aws_vpc_security_group_ingress_rule" "agent_from_lb" {
  for_each = toset(["kafka", "admin"])

  security_group_id            = aws_security_group.agent.id
  description                  = "From the NLB (${each.key})"
  referenced_security_group_id = aws_security_group.load_balancer.id
  ip_protocol                  = "tcp"
  from_port                    = local.agent_ports[each.key]
  to_port                      = local.agent_ports[each.key]
}

# Agent <-> agent on the admin ports: the peer block cache and group-request relay
# (FLOE_PEER_ADDRESS = the task's own IP). Worker i of a task serves admin HTTP on
# admin_port + i, so the range covers every worker. Only agent tasks, never clients.
resource "aws_vpc_security_group_ingress_rule" "agent_from_agent" {
  security_group_id            = aws_security_group.agent.id
  description                  = "Peer traffic from other agents (admin ports of the workers)"
  referenced_security_group_id = aws_security_group.agent.id
  ip_protocol                  = "tcp"
  from_port                    = var.admin_port
  to_port                      = var.admin_port + local.agent_workers - 1
}

resource "aws_vpc_security_group_egress_rule" "agent_to_agent" {
  security_group_id            = aws_security_group.agent.id
  description                  = "Peer traffic to other agents (admin ports of the workers)"
  referenced_security_group_id = aws_security_group.agent.id
  ip_protocol                  = "tcp"
  from_port                    = var.admin_port
  to_port                      = var.admin_port + local.agent_workers - 1
}

# Agents -> S3, Secrets Manager, ECR, CloudWatch (HTTPS through a NAT gateway or
# VPC endpoints) and -> the metastore.
resource "aws_vpc_security_group_egress_rule" "agent_https" {
  security_group_id = aws_security_group.agent.id
  description       = "HTTPS to AWS APIs (S3, Secrets Manager, ECR, CloudWatch Logs)"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_vpc_security_group_egress_rule" "agent_postgres" {
  security_group_id            = aws_security_group.agent.id
  description                  = "PostgreSQL metastore"
  referenced_security_group_id = aws_security_group.database.id
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
}

resource "aws_vpc_security_group_ingress_rule" "database_from_agent" {
  security_group_id            = aws_security_group.database.id
  description                  = "PostgreSQL from the agents"
  referenced_security_group_id = aws_security_group.agent.id
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
}

# -- network load balancer -------------------------------------------------------

resource "aws_lb" "kafka" {
  name               = "${var.name}-nlb"
  load_balancer_type = "network"
  internal           = var.load_balancer_internal
  subnets            = local.lb_subnets
  security_groups    = [aws_security_group.load_balancer.id]

  # Zone affinity: an NLB node only forwards to agents of its own zone.
  enable_cross_zone_load_balancing = false
  enable_deletion_protection       = var.load_balancer_deletion_protection

  tags = local.tags
}

resource "aws_lb_target_group" "bootstrap" {
  name        = "${var.name}-boot"
  port        = var.kafka_port
  protocol    = "TCP"
  target_type = "ip"
  vpc_id      = var.vpc_id

  # Agents drain on SIGTERM (flush + commit): give connections time to move.
  deregistration_delay = 30
  preserve_client_ip   = false

  health_check {
    protocol            = "HTTP"
    port                = tostring(var.admin_port)
    path                = "/readyz" # readiness: metastore, object store, produce pipeline
    interval            = 10
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }

  tags = local.tags
}

resource "aws_lb_target_group" "zone" {
  for_each = toset(local.zones)

  name        = "${var.name}-z${index(local.zones, each.key)}"
  port        = var.kafka_port
  protocol    = "TCP"
  target_type = "ip"
  vpc_id      = var.vpc_id

  deregistration_delay = 30
  preserve_client_ip   = false

  health_check {
    protocol            = "HTTP"
    port                = tostring(var.admin_port)
    path                = "/readyz" # readiness: metastore, object store, produce pipeline
    interval            = 10
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }

  tags = merge(local.tags, { "floe:zone" = each.key })
}

resource "aws_lb_listener" "bootstrap" {
  load_balancer_arn = aws_lb.kafka.arn
  port              = var.kafka_port
  protocol          = "TCP"

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.bootstrap.arn
  }

  tags = local.tags
}

resource "aws_lb_listener" "zone" {
  for_each = toset(local.zones)

  load_balancer_arn = aws_lb.kafka.arn
  port              = local.zone_ports[each.key]
  protocol          = "TCP"

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.zone[each.key].arn
  }

  tags = merge(local.tags, { "floe:zone" = each.key })
}

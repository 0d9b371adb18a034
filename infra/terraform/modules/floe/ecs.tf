# Agents on ECS Fargate: one service per availability zone, so each task knows
# its zone (FLOE_ZONE) and registers with that zone's target group. Agents are
# stateless: scaling and rolling upgrades are plain ECS deployments.

resource "aws_cloudwatch_log_group" "floe" {
  name              = "/ecs/${var.name}"
  retention_in_days = var.log_retention_days
  # The key's policy must allow the logs.REGION.amazonaws.com principal.
  kms_key_id = var.kms_key_arn
  tags       = local.tags
}

resource "aws_ecs_cluster" "floe" {
  name = var.name

  setting {
    name  = "containerInsights"
    value = var.container_insights ? "enabled" : "disabled"
  }

  tags = local.tags
}

# The agent container's only writable path (enable_tls): the TLS volume. Fargate
# mounts an empty bind volume owned by root with mode 0755, which the agent's
# non-root user cannot write, so a non-essential init container (root, no
# secrets, no network use, read-only root filesystem too) gives the directory to
# the agent's user, mode 0700, and exits; the agent starts after it succeeded.
locals {
  tls_volume    = "tls"
  tls_init_name = "tls-volume-init"
  agent_mount_points = var.enable_tls ? [
    { sourceVolume = local.tls_volume, containerPath = local.tls_dir, readOnly = false },
  ] : []
  tls_init_containers = var.enable_tls ? [
    {
      name       = local.tls_init_name
      image      = var.agent_image
      essential  = false
      user       = "0"
      entryPoint = ["/bin/sh", "-c"]
      command    = ["chown ${local.agent_user} ${local.tls_dir} && chmod 0700 ${local.tls_dir}"]

      mountPoints            = local.agent_mount_points
      readonlyRootFilesystem = true

      logConfiguration = {
        logDriver = "awslogs"
        options = {
          "awslogs-group"         = aws_cloudwatch_log_group.floe.name
          "awslogs-region"        = local.region
          "awslogs-stream-prefix" = "tls-init"
        }
      }
    },
  ] : []
}

resource "aws_ecs_task_definition" "agent" {
  for_each = toset(local.zones)

  family                   = "${var.name}-agent-${each.key}"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.agent_cpu
  memory                   = var.agent_memory
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.agent.arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.cpu_architecture
  }

  # enable_tls: an ephemeral task volume (Fargate: on the task's ephemeral
  # storage, gone with the task) for the TLS files the agent writes at start.
  dynamic "volume" {
    for_each = var.enable_tls ? [local.tls_volume] : []
    content {
      name = volume.value
    }
  }

  container_definitions = jsonencode(concat(local.tls_init_containers, [
    {
      name      = "agent"
      image     = var.agent_image
      essential = true
      command   = ["agent"]
      user      = local.agent_user

      # The TLS volume, once the init container has handed it to the agent's user.
      # (null rather than [] without TLS: the same JSON as an absent key.)
      mountPoints = var.enable_tls ? local.agent_mount_points : null
      dependsOn   = var.enable_tls ? [{ containerName = local.tls_init_name, condition = "SUCCESS" }] : null

      portMappings = [
        { name = "kafka", containerPort = var.kafka_port, protocol = "tcp" },
        { name = "admin", containerPort = var.admin_port, protocol = "tcp" },
      ]

      environment = local.agent_environment_lists[each.key]
      secrets     = local.agent_secret_list

      healthCheck = {
        command     = local.health_check_command
        interval    = 10
        timeout     = 5
        retries     = 3
        startPeriod = 30
      }

      # SIGTERM makes the agent flush and commit what it has buffered.
      stopTimeout            = 30
      readonlyRootFilesystem = true
      ulimits                = [{ name = "nofile", softLimit = 65536, hardLimit = 65536 }]

      logConfiguration = {
        logDriver = "awslogs"
        options = {
          "awslogs-group"         = aws_cloudwatch_log_group.floe.name
          "awslogs-region"        = local.region
          "awslogs-stream-prefix" = "agent-${each.key}"
        }
      }
    }
  ]))

  tags = merge(local.tags, { "floe:zone" = each.key })
}

resource "aws_ecs_service" "agent" {
  for_each = toset(local.zones)

  name            = "${var.name}-agent-${each.key}"
  cluster         = aws_ecs_cluster.floe.id
  task_definition = aws_ecs_task_definition.agent[each.key].arn
  launch_type     = "FARGATE"
  desired_count   = var.agents_per_zone

  # Rolling upgrade: start new agents before stopping old ones; roll back when
  # new tasks never become healthy.
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200
  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }
  health_check_grace_period_seconds = 60

  network_configuration {
    subnets          = [var.agent_subnets[each.key]]
    security_groups  = [aws_security_group.agent.id]
    assign_public_ip = false
  }

  load_balancer {
    target_group_arn = aws_lb_target_group.bootstrap.arn
    container_name   = "agent"
    container_port   = var.kafka_port
  }

  load_balancer {
    target_group_arn = aws_lb_target_group.zone[each.key].arn
    container_name   = "agent"
    container_port   = var.kafka_port
  }

  propagate_tags = "SERVICE"
  tags           = merge(local.tags, { "floe:zone" = each.key })

  depends_on = [aws_lb_listener.bootstrap, aws_lb_listener.zone]

  lifecycle {
    # Autoscaling owns the task count after creation.
    ignore_changes = [desired_count]
  }
}

# -- autoscaling on CPU --------------------------------------------------------------

resource "aws_appautoscaling_target" "agent" {
  for_each = aws_ecs_service.agent

  service_namespace  = "ecs"
  resource_id        = "service/${aws_ecs_cluster.floe.name}/${each.value.name}"
  scalable_dimension = "ecs:service:DesiredCount"
  min_capacity       = var.agents_min_per_zone
  max_capacity       = var.agents_max_per_zone
}

resource "aws_appautoscaling_policy" "agent_cpu" {
  for_each = aws_appautoscaling_target.agent

  name               = "${var.name}-agent-${each.key}-cpu"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = each.value.service_namespace
  resource_id        = each.value.resource_id
  scalable_dimension = each.value.scalable_dimension

  target_tracking_scaling_policy_configuration {
    predefined_metric_specification {
      predefined_metric_type = "ECSServiceAverageCPUUtilization"
    }
    target_value       = var.autoscaling_cpu_target
    scale_out_cooldown = 60
    # Scale in slowly: a stopped agent's clients reconnect and re-fetch metadata.
    scale_in_cooldown = 300
  }
}

# Request-count scaling: CPU lags behind a burst of small produce requests (each
# costs the agent a fixed amount of Python), so also track Produce requests per
# task, from the agents' own metric (agent/emf.py), averaged over the zone's tasks.
resource "aws_appautoscaling_policy" "agent_requests" {
  for_each = var.autoscaling_produce_requests_per_task == null ? {} : aws_appautoscaling_target.agent

  name               = "${var.name}-agent-${each.key}-produce-requests"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = each.value.service_namespace
  resource_id        = each.value.resource_id
  scalable_dimension = each.value.scalable_dimension

  target_tracking_scaling_policy_configuration {
    customized_metric_specification {
      namespace   = var.cloudwatch_namespace
      metric_name = "ProduceRequestsPerSecond"
      statistic   = "Average"
      unit        = "Count/Second"

      dimensions {
        name  = "ClusterId"
        value = local.cluster_id
      }
      dimensions {
        name  = "Zone"
        value = each.key
      }
    }
    target_value       = var.autoscaling_produce_requests_per_task
    scale_out_cooldown = 60
    scale_in_cooldown  = 300
  }
}
